"""The elemental emitter: the value of any instruction of a fused computation at an index
(scalar ops, index-transforming ops, contractions, complex and 8-bit float values),
and the partitioner that splits a fused computation into functions."""
