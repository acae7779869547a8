"""What a fusion is before code is emitted: roots, heroes, the emitter choice and its
reason, emitter names, plans shared between fusions of the same structure."""
