"""The verifier's Spark process edge: the session (:mod:`.session`), the Python daemon its
workers start from (:mod:`.pydaemon`) and stopping Spark's jobs on a signal (:mod:`.interrupt`).
"""
