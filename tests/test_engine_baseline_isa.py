"""The compiled engine loads and runs its scalar path on any x86-64 CPU: only the per-ISA
translation units (csrc/kernels/isa_{avx2,avx512,vnni,amx}.cc, reached after cpuid dispatch)
may hold instructions beyond the x86-64 baseline (SSE2). Checked on the built module, so
it also catches what flags cannot show: a compiler that defaults to x86-64-v2/v3, or an
inline function with external linkage compiled in an AVX-512 unit and kept by the linker
for everyone (the hazard isa_common.h warns about).

Owners come from the symbol table: the linker lists each object file's local symbols
after a FILE symbol naming its source; hidden globals (templates, inline functions) come
last, unattributed, and are checked like common code."""
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from pyfastdec import _engine

ISA_UNITS = {"isa_avx2.cc", "isa_avx512.cc", "isa_vnni.cc", "isa_amx.cc"}
# Mnemonics (AT&T, as objdump prints them) beyond SSE2. VEX/EVEX encodings (AVX, AVX2,
# FMA, F16C, AVX-512) all start with "v", AVX-512 mask operations with "k"; the others are
# SSE3, SSSE3, SSE4.1/4.2, POPCNT/LZCNT, BMI1/2 and MOVBE (x86-64-v2 and -v3). tzcnt is
# left out: GCC emits `rep bsf` for baseline code, which objdump prints as tzcnt.
BEYOND_BASELINE = re.compile(
    r"^(v|k|crc32|addsubp|hadd|hsub|lddqu|movddup|movs[hl]dup|fisttp"
    r"|pabs|palignr|phadd|phsub|pmaddubsw|pmulhrsw|pshufb|psign"
    r"|blendp|blendvp|dpp|extractps|insertps|movntdqa|mpsadbw|packusdw|pblendvb|pblendw"
    r"|pcmpeqq|pextr[bdq]|phminposuw|pinsr[bdq]|pmaxs[bd]|pmaxu[dw]|pmins[bd]|pminu[dw]"
    r"|pmovsx|pmovzx|pmuldq|pmulld|ptest|round[ps][sd]|pcmpestr|pcmpistr|pcmpgtq"
    r"|popcnt|lzcnt|andn\b|bextr|blsi|blsmsk|blsr|bzhi|pdep|pext\b|rorx|sarx|shlx|shrx|movbe)")

ENGINE = Path(_engine.__file__)
pytestmark = pytest.mark.skipif(not (shutil.which("objdump") and shutil.which("readelf")),
                                reason="needs binutils (objdump, readelf)")


def function_owners(module: Path) -> dict[int, str]:
    """Start address -> source file of each function ("" for hidden globals)."""
    listing = subprocess.run(["readelf", "-sW", module], capture_output=True, text=True, check=True).stdout
    if "Symbol table '.symtab'" not in listing:
        pytest.skip(f"{module}: stripped (no .symtab), cannot attribute functions to sources")
    owners, source = {}, ""
    for line in listing.split("Symbol table '.symtab'")[1].splitlines():
        fields = line.split()
        if len(fields) < 7 or not fields[0].endswith(":"):
            continue
        kind, name = fields[3], fields[7] if len(fields) > 7 else ""
        if kind == "FILE":
            source = name
        elif kind == "FUNC" and int(fields[1], 16):
            owners.setdefault(int(fields[1], 16), source)
    return owners


def beyond_baseline(module: Path) -> dict[tuple[str, str], set[str]]:
    """(source, function) -> the mnemonics beyond SSE2 it uses."""
    owners = function_owners(module)
    listing = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", module], capture_output=True, text=True,
                             check=True).stdout
    found, function = defaultdict(set), None
    for line in listing.splitlines():
        if start := re.match(r"^([0-9a-f]+) <(.+)>:$", line):
            function = (owners.get(int(start.group(1), 16), ""), start.group(2))
        elif (insn := re.match(r"^\s+[0-9a-f]+:\s+(\S+)", line)) and function is not None:
            if BEYOND_BASELINE.match(insn.group(1)):
                found[function].add(insn.group(1))
    return found


def test_only_the_isa_units_use_instructions_beyond_x86_64_baseline():
    found = beyond_baseline(ENGINE)
    # The detector sees what it must: every ISA unit has its vector code.
    assert {source for source, _ in found} >= ISA_UNITS, sorted({source for source, _ in found})
    outside = {f"{source or '(hidden global)'}: {name}: {' '.join(sorted(mnemonics)[:6])}"
               for (source, name), mnemonics in found.items() if source not in ISA_UNITS}
    assert not outside, f"{ENGINE}: beyond-baseline instructions outside the ISA units:\n" + "\n".join(sorted(outside))


def test_the_symbol_table_attributes_the_common_sources():
    sources = set(function_owners(ENGINE).values())
    # isa_amx_emulated.cc (the AMX GEMM on emulated tiles) is common code: any CPU runs it.
    assert {"dispatch.cc", "cpu_features.cc", "isa_scalar.cc", "gemm_i8.cc", "isa_amx_emulated.cc"} <= sources, \
        sorted(sources)
