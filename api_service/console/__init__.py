"""The operator console: server-rendered pages over HTTP, in the API process, for admin principals."""
