"""Privacy accounting: the budget, the maps (Gaussian, threshold, peeling) and the calibrations.

- :mod:`~opendp_wgm.privacy.budget`: :class:`~opendp_wgm.privacy.budget.Budget` and the one reading of the
  output measures;
- :mod:`~opendp_wgm.privacy.gaussian`: the analytic Gaussian δ, ρ, the lattice slack and the WGM's map;
- :mod:`~opendp_wgm.privacy.threshold`: the weight lattice and the threshold δ;
- :mod:`~opendp_wgm.privacy.peeling`: the maps of peeling and limited-domain top-k;
- :mod:`~opendp_wgm.privacy.sips`: DP-SIPS's schedule and the composed map of its rounds;
- :mod:`~opendp_wgm.privacy.partition`: partition selection's release probabilities and map;
- :mod:`~opendp_wgm.privacy.calibrate`: every calibration, on one search (:mod:`~opendp_wgm.privacy.search`),
  gathered from ``wgm_calibration``, ``sips_calibration``, ``two_stage_calibration`` and ``baseline_calibration``.

Derivations: ``docs/privacy.md``, ``docs/top_k.md``, ``docs/hitting_set.md``.
"""
