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

# conv1d 0-2: the image and filter prefetches and (0-1) the output store were written over
# legacy `nl.arange` index grids (`_create_indices`). The same accesses as slices, in the
# form the mechanical port gave conv1d 3-6 (`[0:C, W_padding_l:W_padding_l + W]`,
# `[0:C, 0:H_f * (W_f - 1) + 1:H_f]`): grid i_cin = c_tile * 128 + arange(C) is the slice
# c_tile * 128:c_tile * 128 + C, grid i_w * H_f + i_h the stride-H_f slice from i_h.
_CONV_PREFETCH = [
    Fix(r"i_cin_tile, i_w = _create_indices\(C_TILE_SIZE, W\)\n\s*i_cin = i_cin_tile \+ "
        r"c_tile \* 128\n(\s*)i_h = 0\n\s*i_image = W_padding_l \+ i_w\n\s*"
        r"nisa\.dma_copy\(dst=img_local_prefetch_raw\[i_n\]\[c_tile\]\[i_cin_tile, i_image\], "
        r"src=img_ref\[i_n, i_cin, i_h, i_w\]\)",
        r"i_h = 0\n\1nisa.dma_copy(dst=img_local_prefetch_raw[i_n][c_tile][0:C_TILE_SIZE, "
        r"W_padding_l:W_padding_l + W], src=img_ref[i_n, c_tile * 128:c_tile * 128 + "
        r"C_TILE_SIZE, i_h, 0:W])", 1,
        "image prefetch as slices (legacy nl.arange index grid removed)"),
    Fix(r"i_cin_tile, i_w = _create_indices\(C_TILE_SIZE, W_f\)\n\s*i_cin = i_cin_tile \+ "
        r"c_tile \* 128\n(\s*)i_h = 0\n\s*nisa\.dma_copy\(dst=filter_local\[c_tile\]"
        r"\[i_cin_tile, i_w \* H_f \+ i_h\], src=filter_ref\[i_cin, i_h, i_h, i_w\]\)",
        r"i_h = 0\n\1nisa.dma_copy(dst=filter_local[c_tile][0:C_TILE_SIZE, "
        r"i_h:i_h + H_f * (W_f - 1) + 1:H_f], src=filter_ref[c_tile * 128:c_tile * 128 + "
        r"C_TILE_SIZE, i_h, i_h, 0:W_f])", 1,
        "filter prefetch as slices (legacy nl.arange index grid removed)"),
]
# conv1d 0-1 store: out_hbm[n, c_out, i_k0, i_k1] <- out_sb[n, c_tile, i_cout, i_out] with
# i_out = i_k1 * K0 + i_k0 over grids; K0 == 1 at these shapes (H == H_f == 1, the kernel's
# own comment), so i_out = i_k1 and the store is one [C, K1] block (asserted in the copy).
# The channel mask never masks (C_out a multiple of 128), as in conv1d 3-4.
_CONV_STORE01 = Fix(
    r"i_cout, i_k0, i_k1 = _create_indices\(C_TILE_SIZE, K0, K1\)\n\s*c_out = .*\n\s*"
    r"i_out = .*\n\s*mask = .*\n\s*# PORT-TODO: mask form: mask\n(\s*)nl\.store\(\n\s*"
    r"out_hbm\[n, c_out, i_k0, i_k1\],\n(\s*)out_sb\[n, c_tile, i_cout, i_out\],\n\s*"
    r"mask=mask\n",
    r"assert K0 == 1  # nkibot port fix: i_out == i_k1 only when K0 == 1\n\1nl.store(\n\2"
    r"out_hbm[n, c_tile * C_TILE_SIZE:(c_tile + 1) * C_TILE_SIZE].reshape((C_TILE_SIZE, "
    r"K0 * K1)),\n\2out_sb[n][c_tile][0:C_TILE_SIZE, 0:out_image_size],\n", 1,
    "output store as one [C, K1] block over a reshaped HBM view (legacy index grid "
    "removed; K0 == 1 asserted)")
# conv1d 2 store: the aggregated store over flattened grids, as conv1d 3 (_CONV3).
_CONV_STORE2 = Fix(
    r"nl\.store\(out_hbm\[n, chan_idx, k0, k1\], sbuf_block, mask=pred\)",
    r"nl.store(out_hbm[n, base_chan:base_chan + C_TILE_SIZE].reshape((C_TILE_SIZE, "
    r"K0 * K1)), sbuf_block)", 1,
    "flattened output store over a reshaped HBM view (legacy index grid removed)")

FIXES: dict[str, list[Fix]] = {
    "kernels/autocomp_mamba_step6.py": [_MAMBA_BCAST],
    "kernels/autocomp_mamba_step7.py": [_MAMBA_BCAST],
    "kernels/autocomp_sdattn_step3.py": _SDATTN_TRANSPOSE,
    "kernels/autocomp_sdattn_step4.py": _SDATTN_TRANSPOSE,
    "kernels/autocomp_conv1d_step0.py": [*_CONV_PREFETCH, _CONV_STORE01],
    "kernels/autocomp_conv1d_step1.py": [*_CONV_PREFETCH, _CONV_STORE01],
    "kernels/autocomp_conv1d_step2.py": [*_CONV_PREFETCH, _CONV_STORE2],
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
