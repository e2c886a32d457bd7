"""Unit tier: no database and no running service; the code, the files of the checkout and its tools."""
