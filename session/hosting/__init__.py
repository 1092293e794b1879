"""The host: claims sessions under leases and runs them with the embedded runtime,
applying the commands clients leave in their inbox."""
