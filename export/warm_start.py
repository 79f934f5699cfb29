"""Initialise a student (or drafter) from a trained teacher checkpoint.

On a CPU budget of minutes per model, training a distilled student from random weights
spends most of its time relearning what the teacher already knows: the embeddings and the
encoder. Copying them, and spreading the teacher's decoder layers over the student's
shallower stack (layer dropping: student layer i takes teacher layer round(i (T-1)/(S-1))),
gives fine-tuning a start that already translates.

A tensor is copied only when the student has a tensor of the same role and shape; others
(e.g. an SSRU replacing self-attention, a drafter's block-position embedding) keep their
random initialisation. The caller gets the list of both, so the log says what happened.
"""
from __future__ import annotations

import re

import torch

_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")


def spread(student_layers: int, teacher_layers: int) -> list[int]:
    """Teacher layer index for each student layer: first and last kept, the rest evenly spaced."""
    if student_layers <= 0 or teacher_layers <= 0:
        return []
    if student_layers == 1:
        return [teacher_layers - 1]  # the top layer is the one the output layer was trained on
    return [round(i * (teacher_layers - 1) / (student_layers - 1)) for i in range(student_layers)]


def count_layers(state: dict, stack: str) -> int:
    found = {int(m.group(2)) for k in state if (m := _LAYER.match(k)) and m.group(1) == stack}
    return max(found) + 1 if found else 0


def init_from_teacher(student: torch.nn.Module, teacher_state: dict) -> tuple[list[str], list[str]]:
    """Copy matching tensors of `teacher_state` into `student` in place.

    Returns (copied, kept): student tensor names that were copied, and those that kept
    their initialisation (no teacher tensor of that role, or a different shape).
    """
    target = student.state_dict()
    layer_map = {stack: spread(count_layers(target, stack), count_layers(teacher_state, stack))
                 for stack in ("encoder", "decoder")}
    copied, kept, update = [], [], {}
    for name, tensor in target.items():
        source = name
        if m := _LAYER.match(name):
            stack, index, rest = m.group(1), int(m.group(2)), m.group(3)
            source = f"{stack}.layers.{layer_map[stack][index]}.{rest}" if layer_map[stack] else ""
        value = teacher_state.get(source)
        if value is not None and tuple(value.shape) == tuple(tensor.shape):
            update[name] = value.detach().clone().to(tensor.dtype)
            copied.append(name)
        else:
            kept.append(name)
    student.load_state_dict(update, strict=False)
    return copied, kept
