"""Vocabularies of the rule-based filters, as data: one module per filter, one named constant per list.

Each filter compiles its lists once, at import, into one combined regex per vocabulary.
"""
