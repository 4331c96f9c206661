"""The responder: acts on the stream's action requests (cordon, ticket, notification)."""
