-- What a lambda's executions may reach (outbound HTTP, configuration
-- variables), as the JSON of waft_core::Grants; '{}' grants nothing, which
-- is what every version deployed before had.
-- Keep in step with ../sqlite.
ALTER TABLE lambda_versions ADD COLUMN grants TEXT NOT NULL DEFAULT '{}';
