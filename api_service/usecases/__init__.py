"""What the API does, in domain terms: no gRPC, no proto types."""
