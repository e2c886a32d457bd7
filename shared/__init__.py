"""Code both services share: the domain, the handler API and storage. Imports neither service."""
