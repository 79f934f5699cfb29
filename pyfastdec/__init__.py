"""pyfastdec: fast CPU decoding of seq2seq translation and correction models."""
from pyfastdec._version import __version__
from pyfastdec.runtime import cpu_info, default_threads, ThreadPool
from pyfastdec.api import Corrector, LongInputWarning, Translator

__all__ = ["__version__", "cpu_info", "default_threads", "ThreadPool", "Corrector", "LongInputWarning",
           "Translator"]
