"""Op set x coverage -> verdicts: judging, check, gaps, diff, and their report formats."""
