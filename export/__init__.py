"""Training, distillation, quantisation and export for pyfastdec (PyTorch side).

Never imported at inference time: the runtime package `pyfastdec` needs only numpy and
sentencepiece.
"""
