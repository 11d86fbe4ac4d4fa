"""Command-line options `nkibot convert` and `nkibot verify` share (one spelling, one help)."""

from __future__ import annotations

from typing import Annotated

import typer

ShapeOption = Annotated[list[str] | None, typer.Option(
    help="input shape override NAME=DIMSxDTYPE, e.g. x=128x256xfloat32")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the JSON result")]
TargetOption = Annotated[str | None, typer.Option(
    "--target", help="Trainium generation trn1|trn2|trn3 (default: NKIBOT_TARGET, else "
                     "this host's device, else trn1)")]
