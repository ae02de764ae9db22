# filled in by the collectives and trainer work
