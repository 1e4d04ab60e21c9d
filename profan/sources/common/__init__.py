"""What every reader shares: the CSV text pass (`csvtext`), row frames with their source pointers (`rowframe`),
interval arithmetic (`intervals`), the parsed-file cache (`cache`) and reading a cited row back (`readback`)."""
