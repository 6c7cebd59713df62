"""`python -m pilotfish.analytics.dashboard SESSION_DIR`: the dashboard without the CLI."""

from pilotfish.analytics.dashboard import dashboard

if __name__ == "__main__":
    dashboard()
