"""Suite-wide pytest configuration: plugin fixtures shared by several test packages."""

pytest_plugins = ["tests.fixtures_s3", "tests.fixtures_spark"]
