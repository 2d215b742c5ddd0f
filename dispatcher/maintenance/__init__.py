"""The dispatcher's maintenance jobs, beside tiering: retention and its deletions, garbage
collection, the config backup (each also run periodically by the sidecar), and the
operator's repair and resume of a queue that tiering stopped.
"""
