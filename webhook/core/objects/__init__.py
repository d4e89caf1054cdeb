"""Kubernetes objects as JSON, below every other room: strict JSON decoding with the reason for every
refusal (:mod:`.jsonbody`), paths into an object and their RFC 6901 form (:mod:`.paths`), resource
quantities (:mod:`.quantity`) and frozen values (:mod:`.frozen`). Imports nothing of the project.
"""
