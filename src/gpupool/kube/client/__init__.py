"""Resource access, talking to the API server: the HTTP port, informers, leader election."""
