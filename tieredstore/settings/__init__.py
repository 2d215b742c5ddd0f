"""Every setting declared once (:mod:`.keys`), its value syntax (:mod:`.values`), how a
run loads them (:mod:`.loader`) and the docs generated from them (:mod:`.docs`)."""
