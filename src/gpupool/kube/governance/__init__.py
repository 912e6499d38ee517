"""Runtime governance, live: the controller carrying out the pure rules, audit, cost ledger."""
