"""pytest fixtures for the GitHub double (filled in by the ingress work)."""
