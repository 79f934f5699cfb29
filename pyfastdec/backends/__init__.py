"""Backends implementing the Backend protocol of base.py (native engine; the torch reference lives in export/)."""
