"""Projects: a user's own code in any language, with ``check`` and ``bench`` commands.

- ``kind``: the kind's face to the rest of maxcode (``ProjectKind``).
- ``spec``: ``task.toml``'s project keys, the bundle of editable files and its text form.
- ``init``: ``maxcode init``, a task written for a project folder.
- ``edits``: a model's answer (whole files or a unified diff) applied to a bundle.
- ``evaluate_project``: build, check and bench a candidate bundle in the sandbox.
- ``rewrites``: the offline proposer's Python rewrites.
- ``templates``: the policy's and critic's prompts.
"""
