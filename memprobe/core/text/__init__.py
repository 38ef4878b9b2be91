"""Words and numbers for people: byte sizes, comma lists, terminal widths, the repeat rule in words."""
