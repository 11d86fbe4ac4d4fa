"""Port fixes for the calibration kernels of `shared/perf-calibration/`, applied to a copy.

The lead's folder is read-only, and its kernels are third-party code we must not commit.
So the fixes that finish their ports live here as exact substitutions, each with the
reason, and `bench/perf_calibration.py` applies them to a temporary copy of the folder
(`--no-port-fixes` runs the files as they are). A substitution whose text is not found
the expected number of times is an error: the kernel changed, so the fix must be re-read.

Every fix keeps the loop structure, tile sizes and instruction choice (the issue's rule);
each one finishes a mechanical-port leftover. The applied fixes are written into the
copied file's header, one line each.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Fix:
    """Replace `old` (a regular expression) by `new`, exactly `count` times."""

    old: str
    new: str
    count: int
    why: str


# mamba 6-7: the legacy `nl.multiply(tile[P, F], row[1, F])` broadcast the row over the
# partitions implicitly; NKI 0.4's `nl` ops do not broadcast, so the broadcast is spelled
# out with `nl.broadcast_to` (what the legacy compiler had to emit for it).
_MAMBA_BCAST = Fix(
    r"nl\.multiply\((deltaU\[:, f0:f1\]|deltaU_chunk|scan_res(?:_t)?), ([BC]_(?:buf|t)[01])\)",
    r"nl.multiply(\1, nl.broadcast_to(\2, shape=\1.shape))", 8,
    "implicit partition broadcast of a [1, F] B/C row made explicit (nl.broadcast_to)")

# SD attention 3-4: `nc_transpose(engine=vector)` of a [128, 64] tile. VectorE transposes
# at most 32x32 (legacy nc_transpose docstring); the legacy compiler, which ran it on
# hardware, must have placed it on TensorE, whose transpose writes PSUM.
_SDATTN_TRANSPOSE = [
    Fix(r"(divisor_vec = nl\.ndarray\(.*?), buffer=nl\.sbuf\)", r"\1, buffer=nl.psum)", 1,
        "the transposed divisor lands in PSUM, as a TensorE transpose requires"),
    Fix(r"(nisa\.nc_transpose\(dst=divisor_vec, .*?), engine=nisa\.engine\.vector\)",
        r"\1, engine=nisa.engine.tensor)", 1,
        "[128, 64] transpose on TensorE: VectorE transposes at most 32x32"),
]

# conv1d 3-4: the store used the legacy flattened index grids (chan_store, k0 = i // K1,
# k1 = i % K1), removed by the port without a replacement. The same store over a
# flattened view of the output row: out_hbm[n, c0:c1] reshaped to (C, K0*K1). The mask
# (channel < C_out) never masks at these shapes (C_in == C_out, a multiple of 128).
_CONV_FLAT = "out_hbm[i_n, base_c:base_c + C_TILE_SIZE].reshape((C_TILE_SIZE, K0 * K1))"
_CONV3 = [Fix(r"out_hbm\[i_n, chan_store, k0, k1\],\n(\s*)out_tile\[i_p_store, i_flat\],\n"
              r"\s*mask=pred\n",
              _CONV_FLAT + r",\n\1out_tile[0:C_TILE_SIZE, 0:out_image_size],\n", 1,
              "flattened output store over a reshaped HBM view (legacy index grid removed)")]
_CONV4 = [
    Fix(r"out_hbm\[i_n, chan_store, k0_blk, k1_blk\],\n(\s*)out_sbuf_blk\[i_p_store, "
        r"i_fb_blk\],\n\s*mask=pred\n",
        _CONV_FLAT + r"[:, blk_base:blk_base + F_BLK],\n\1out_sbuf_blk,\n", 1,
        "block store over a reshaped HBM view (legacy index grid removed)"),
    Fix(r"out_hbm\[i_n, chan_store, k0_tail, k1_tail\],\n(\s*)out_sbuf_tail\[i_p_store, "
        r"i_fb_tail\],\n\s*mask=pred\n",
        _CONV_FLAT + r"[:, tail_base:tail_base + F_TAIL],\n\1out_sbuf_tail,\n", 1,
        "tail store over a reshaped HBM view (legacy index grid removed)"),
]

FIXES: dict[str, list[Fix]] = {
    "kernels/autocomp_mamba_step6.py": [_MAMBA_BCAST],
    "kernels/autocomp_mamba_step7.py": [_MAMBA_BCAST],
    "kernels/autocomp_sdattn_step3.py": _SDATTN_TRANSPOSE,
    "kernels/autocomp_sdattn_step4.py": _SDATTN_TRANSPOSE,
    "kernels/autocomp_conv1d_step3.py": _CONV3,
    "kernels/autocomp_conv1d_step4.py": _CONV4,
}


class PortFixError(ValueError):
    """A fix no longer matches its kernel (the file changed): re-read it."""


def apply(text: str, fixes: list[Fix], name: str) -> str:
    """`text` with every fix applied and a header line per fix."""
    header = []
    for f in fixes:
        text, n = re.subn(f.old, f.new, text)
        if n != f.count:
            raise PortFixError(f"{name}: port fix {f.why!r} matched {n} times, expected "
                               f"{f.count}; the kernel changed, re-read the fix")
        header.append(f"# nkibot port fix ({n}x): {f.why}\n")
    return "".join(header) + text


def patched_copy(folder: Path, dest: Path) -> dict[str, list[str]]:
    """Copy `folder` to `dest` with the fixes applied; kernel file -> the fixes used."""
    shutil.copytree(folder, dest, dirs_exist_ok=True)
    used: dict[str, list[str]] = {}
    for rel, fixes in FIXES.items():
        path = dest / rel
        if not path.is_file():
            continue  # another folder in the same format: nothing to fix there
        path.write_text(apply(path.read_text(), fixes, rel))
        used[rel] = [f.why for f in fixes]
    return used
