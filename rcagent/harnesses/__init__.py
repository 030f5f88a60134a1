"""RCAtlas's free harnesses: simple loops that prescribe none of the model's calls.

`oneshot`: the whole case as one evidence package, one model call. `sql`: a ReAct loop over the job's
tables with four tools (list tables, a table's schema, a read-only query, submit). Both share the store,
the serving, the stabilizers' JSON repair and the diagnosis of the other modes.
"""
