module huntlb.local/pause

go 1.24
