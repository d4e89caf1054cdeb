"""The request path's first and last step: an AdmissionReview in, an AdmissionReview out.

Owns the envelope (:mod:`.envelope`: parse, validate, build the response) and the entry point that
runs the whole path (:mod:`.review`: parse → resolve team → plan → JSON Patch → respond). May import
every other room of the core; nothing in the core imports it.
"""
