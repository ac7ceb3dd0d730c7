"""``sakur4 wrap``: one command that runs a coding-agent harness through the gateway,
starting the gateway for the run when none is running and stopping it afterwards."""
