"""The live scheduler's side of DRA: claims in, claim pods' plans and holdings out.

Watches of claims, slices and classes and the release of unused claims (:mod:`.claim_informers`),
the plans and holdings of claim pods (:mod:`.claims`, :mod:`.claim_state`), their eligible
devices as GPU columns (:mod:`.claim_eligibility`), what claims cost and free
(:mod:`.claim_ledger`) and what is written into them (:mod:`.claim_writes`).
"""
