"""Figures beyond the paper: long horizons, Γ(t), the Thm 3.3(b) bound along the trajectory, GD
against the flow, row-wise sinks, max-margin token selection (``gradflow figures``)."""
