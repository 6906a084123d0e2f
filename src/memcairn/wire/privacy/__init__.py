"""Privacy rules applied to every hook event before anything is stored or sent to a model.

Two steps, in this order: text the user fenced with ``<private>…</private>`` is dropped, then anything that looks
like a credential is replaced by a typed placeholder such as ``[REDACTED:github_token]``. Both fail closed: an
unclosed ``<private>`` hides everything after it, a ``</private>`` never opened everything before it, and a
truncated private key is still redacted.

Every pattern is written so that its cost stays linear in the input (bounded quantifiers wherever a match could
start at many positions), and patterns are compiled on first use to keep the import cheap.

``private_tags`` removes ``<private>`` parts; ``rules`` holds the token formats and their placeholders,
``assignments`` and ``prose`` the secrets a name points at, ``redaction`` runs them all over text (the base64
of a secret too), and ``scrubbing`` cleans whole events, keys and values together.
"""
