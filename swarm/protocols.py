"""Request/response protocol ids (DESIGN.md: bulk bytes never ride gossip)."""

SYNC = "/swarm/sync/1"  # signed task announcements by id, for peers that joined after the gossip
BLOB = "/swarm/blob/1"  # rollout and weight blobs by content hash
SHARD = "/swarm/shard/2"  # weight pieces by manifest root + piece index (swarm/pieces.py)
ALL = (SYNC, BLOB, SHARD)
