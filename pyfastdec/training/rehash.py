"""Record the content checksums of a model directory in its config.json.

    python -m export.rehash models/en-de [models/uk-gec ...]

config.json "checksum" (export/FORMAT.md, *Checksum*) holds the sha256 of model.safetensors,
of spm.model, of shortlist.bin when there is one, and of config.json's own canonical
content; pyfastdec refuses a directory whose files differ from it. writer.py writes it with every directory; run this after
changing a directory's files on purpose (or to add the field to an older directory). The
directory must otherwise be valid: it is loaded with the new checksums before this
returns, and config.json is left as it was if that fails. Only config.json changes.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pyfastdec.model_dir import CONFIG_FILE, WEIGHTS_FILE, ModelDir, ModelDirError, load_config_json
from pyfastdec.model_dir.checksums import directory_checksums


def dump_config(config: dict) -> str:
    """config.json's text as writer.py writes it (2-space indent, trailing newline)."""
    return json.dumps(config, indent=2) + "\n"


def rehash(path: str | Path, changes: dict | None = None) -> dict[str, str]:
    """Write config.json "checksum" for the directory's current files, after setting the
    config fields in `changes` (one write: an interruption leaves the old config.json);
    returns the checksums. Raises ModelDirError (and leaves config.json unchanged) if the
    directory does not load."""
    path = Path(path)
    config_file = path / CONFIG_FILE
    # Refuses a config.json with a key twice before its old text is rewritten as one.
    config = dict(load_config_json(config_file))
    previous = config_file.read_bytes()
    config.update(changes or {})
    config.pop("checksum", None)
    config["checksum"] = directory_checksums(path, config)
    _replace(config_file, dump_config(config).encode("utf-8"))
    try:
        ModelDir.load(path)
    except ModelDirError:
        _replace(config_file, previous)
        raise
    return config["checksum"]


def _replace(file: Path, data: bytes) -> None:
    # Write-then-rename: an interrupted rehash leaves the old config.json, not half of one.
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, file)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dirs", nargs="+", type=Path, metavar="MODEL_DIR")
    args = ap.parse_args(argv)
    for path in args.model_dirs:
        try:
            digests = rehash(path)
        except ModelDirError as err:
            print(f"export.rehash: {err}")
            return 1
        print(f"{path}: {WEIGHTS_FILE} {digests[WEIGHTS_FILE]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
