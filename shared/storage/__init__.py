"""PostgreSQL storage: migrations, the SQL statements (in sql/*.sql) and the one place where database
errors become domain errors."""
