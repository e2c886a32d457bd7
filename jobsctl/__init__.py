"""Command-line client of the job service: `jobsctl submit|get|watch|result|list|events|cancel|retry|dev`."""
