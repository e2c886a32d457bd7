"""Domain types, rules and errors. Imports neither grpc nor psycopg."""
