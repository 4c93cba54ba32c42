from bpfsym._start import main

main()
