"""Model conversion: other frameworks' models into pyfastdec model directories, ours
into other engines' formats, and the int8 form of a float32 directory.

One module per direction, plus what they share; each needs only numpy and
sentencepiece, except where a module says otherwise:

    hf_marian_import    Hugging Face MarianMTModel directory -> model directory
                        (torch only to read a pytorch_model.bin)
    marian_npz_import   Marian .npz checkpoint (+ text lexical shortlist) -> model directory
    marian_npz_export   model directory -> Marian .npz, vocabularies, lex.s2t, decoder.yml
    ctranslate2_export  model directory -> CTranslate2 model (the ctranslate2 package:
                        the 'bench' extra)
    int8                float32 model directory -> int8 one (weights per row; activations
                        dynamic, or static multipliers from calibration)
    calibration         static int8 activation multipliers: the float forward pass in numpy
    ibm1_shortlist      IBM Model 1 lexical shortlists from parallel text
    weights, positions  shared: float32 tensors of a directory, pruned layers padded to
                        one size per stack; the sinusoidal position tables
    command             `python -m pyfastdec.convert` / `fastdec convert`

Nothing here imports export/ or bench/ (a wheel has neither); export/ builds on this
package's int8 rounding, multiplier rule and IBM Model 1 code. Importing the package
imports no converter: each command loads only what it runs.
"""
