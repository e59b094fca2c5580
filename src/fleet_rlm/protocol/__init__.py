"""The event protocol every layer speaks: event types, turn statuses and payloads, versioned."""
