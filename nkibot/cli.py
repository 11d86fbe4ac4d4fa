"""`nkibot` commands: convert | verify | serve | dispatch | replay | runner | doctor | sim | mcp.

Each command lives beside the code it drives; this module only joins them. Keep
heavy imports (torch, the simulator, FastAPI) inside the command functions so that
`nkibot --help` stays fast.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="nkibot",
    help="Turn PyTorch modules and Triton kernels into verified AWS Trainium NKI kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Turn PyTorch modules and Triton kernels into verified AWS Trainium NKI kernels."""


# --- registrations: one line per command, owned by the module it names -------------
from nkibot.convert.cli import convert  # noqa: E402

app.command("convert")(convert)
from nkibot.convert.verify_cli import verify  # noqa: E402

app.command("verify")(verify)
from nkibot.bot.cli import dispatch, replay, serve  # noqa: E402

app.command("serve")(serve)
app.command("dispatch")(dispatch)
app.command("replay")(replay)
from nkibot.runner.cli import runner  # noqa: E402

app.command("runner")(runner)
from nkibot.doctor import doctor  # noqa: E402

app.command("doctor")(doctor)
from nkibot.sim.cli import app as sim_app  # noqa: E402

app.add_typer(sim_app, name="sim")
from nkibot.mcp.cli import mcp  # noqa: E402

app.command("mcp")(mcp)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
