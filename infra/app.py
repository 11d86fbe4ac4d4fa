"""`cdk synth` / `cdk deploy` entry point (cdk.json: "app": "python app.py")."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from nkibot_infra.stack import NkibotStack

REPO_ROOT = Path(__file__).resolve().parent.parent

app = cdk.App()
NkibotStack(app, "Nkibot", image_context=REPO_ROOT, description="nkibot GitHub App on AWS")
app.synth()
