#include <isa-l/crc.h>
