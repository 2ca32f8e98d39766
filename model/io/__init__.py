"""Careful file reading and writing: atomic writes, bounded reads, errors that name the file."""
