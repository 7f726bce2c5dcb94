"""Publishing images: the gate, tags, promotion, attestations and the publish use case."""
