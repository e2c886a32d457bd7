"""The checks a chaos run's history must pass, one module per promise of the contract."""
