"""Gateway: queues sessions onto model workers and relays their traffic."""
