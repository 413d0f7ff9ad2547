"""What the benchmarks and the tests share without importing each other: tools that make test
material (speech from other voices). Neither the gateway nor the workers import it."""
