"""The HLO grammar, shipped inside the wheel as package data (hlo_compile.grammars)."""
