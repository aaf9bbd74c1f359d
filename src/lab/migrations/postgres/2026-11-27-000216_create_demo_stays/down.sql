-- btree_gist stays: another table may use it, and an unused extension costs nothing.
DROP TABLE demo_stays;
