"""Code shared by the gateway and the workers: config, protocol, audio, model backends."""
