"""The chaos run: the real services under random faults, a recorded history of what every client and
handler saw, and a checker of that history against the contract (docs/CHAOS.md)."""
