"""Training on the PyTorch side that the installed package runs: `fastdec train-heads`
(heads_command.py) and what it needs, the PyTorch reference model (modeling.py), reading
and writing model directories (writer.py), calibration (calibrate.py).

Needs the `train` extra (torch, safetensors): `pip install "pyfastdec[train]"`. Nothing
here is imported at inference time. The rest of the training code (recipes, distillation,
pruning) stays in the repository's export/, which imports these modules from here.
"""
